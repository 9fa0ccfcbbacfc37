import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Records from Apache Kafka's own Java client, as a team's services send them: a transactional producer with
 * the client's defaults otherwise (idempotence, acks=all, its partitioner), one key in three null, transactions
 * of ten records of which every seventh is aborted, one record in 97 not JSON, one in five an amount of
 * 9,999,999,999,999,999.99. Run as a single-file source program: java -cp '.jars/kafka/*' TransactionalProducer.java
 * BOOTSTRAP TOPIC TRANSACTIONS. Prints "committed N aborted M".
 */
public class TransactionalProducer {
  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", args[0]);
    p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("transactional.id", "rewind-test-" + args[1]);
    int committed = 0, aborted = 0;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      producer.initTransactions();
      for (int t = 0; t < Integer.parseInt(args[2]); t++) {
        producer.beginTransaction();
        for (int i = 0; i < 10; i++) {
          int n = t * 10 + i;
          String amount = n % 5 == 0 ? "9999999999999999.99" : n + ".01";
          String value = n % 97 == 0 ? "not json " + n : "{\"id\":\"j-" + n + "\",\"amount\":\"" + amount + "\"}";
          producer.send(new ProducerRecord<>(args[1], n % 3 == 0 ? null : "k" + n, value));
        }
        if (t % 7 == 3) {
          producer.abortTransaction();
          aborted += 10;
        } else {
          producer.commitTransaction();
          committed += 10;
        }
      }
    }
    System.out.println("committed " + committed + " aborted " + aborted);
  }
}
